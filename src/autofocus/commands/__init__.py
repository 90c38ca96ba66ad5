"""CLI command modules, one per area; each registers on ``autofocus.cli_app.app``."""
