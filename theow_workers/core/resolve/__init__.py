"""Resolving one failure: the library of rules and actions, the plan of rules to try, the verdict and where in the log it points."""
