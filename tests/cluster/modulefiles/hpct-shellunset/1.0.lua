-- Emits shell code that expands an unset variable when the module is loaded (what conda-style
-- activation hooks, `source_sh` and `execute{}` lines in site modules do). The code runs in the
-- caller's shell, so `set -u` there applies to it.
whatis("hpctrain test module: runs shell code that expands an unset variable")
setenv("HPCT_SHELLUNSET", "1.0")
execute{cmd="HPCT_SHELLUNSET_SEEN=\"${HPCT_SURELY_UNSET}x\"", modeA={"load"}}
