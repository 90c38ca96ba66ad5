"""autofocus subpackage."""
