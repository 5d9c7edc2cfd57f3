"""The rules: the rule model and its YAML schema, how a rule matches facts, and the checks a rule is held to on its own."""
