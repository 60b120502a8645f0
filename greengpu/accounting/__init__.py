"""Accounting: energy, cost and CO2 meters; the SQLite ledger."""
