"""The model side: tools, budgets and errors, the tool loop over the model port, and one-call explanations."""
