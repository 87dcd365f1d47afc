"""Run directories: where a run lives (records.py), the code copied into it (snapshot.py), and
how what is read back from one is checked, since it is shared, untrusted data (untrusted.py)."""
