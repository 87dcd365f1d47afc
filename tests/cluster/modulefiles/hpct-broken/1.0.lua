-- A module that always fails to load, as a site module does when its software is missing.
whatis("hpctrain test module: always fails to load")
setenv("HPCT_BROKEN", "should-not-be-set")
LmodError("hpct-broken/1.0: this module always fails to load (test)")
