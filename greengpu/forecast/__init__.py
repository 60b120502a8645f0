"""Capacity forecasting (statsmodels models, backtests, capacity sizing). Pure: no I/O."""
