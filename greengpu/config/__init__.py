"""Configuration loading and validation: inventories and policies; errors name file, line and key."""
