-- Reads environment variables that are usually unset, the way many site modules do
-- (e.g. to extend a path that may not exist yet). Lua sees nil, not an error.
whatis("hpctrain test module: reads unset variables")
local extra = os.getenv("HPCT_SURELY_UNSET") or ""
setenv("HPCT_UNSETVAR", "loaded" .. extra)
prepend_path("HPCT_SEARCH_PATH", "/opt/hpct/unsetvar")
append_path("LD_LIBRARY_PATH", "/opt/hpct/unsetvar/lib")
