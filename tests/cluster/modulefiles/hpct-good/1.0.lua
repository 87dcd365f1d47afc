-- A well-behaved module: sets a variable and prepends a PATH entry.
whatis("hpctrain test module: sets HPCT_GOOD and prepends a PATH entry")
local root = pathJoin(myFileName():match("(.*)/modulefiles/"), "modulefiles-bin")
setenv("HPCT_GOOD", "1.0")
prepend_path("PATH", root)
