"""SHA-256 for the caches' keys (yamlfile.py, precompiled.py) without importing hashlib, whose
import loads OpenSSL's libcrypto: ~2 ms of a warm `hpctrain render` that reads two cache entries.
CPython's own SHA-256 (the module hashlib falls back on) gives the same digests; hashlib is used
where it is missing (another Python)."""
try:
    from _sha2 import sha256  # CPython 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256  # CPython 3.10, 3.11
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256"]
