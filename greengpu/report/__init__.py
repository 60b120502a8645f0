"""Reports: check summary, plan, monthly cost and CO2."""
