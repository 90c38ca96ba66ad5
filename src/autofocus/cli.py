"""Entry point of the ``autofocus`` command: importing a command module registers its commands."""

import importlib
import pkgutil

from autofocus import commands
from autofocus.cli_app import app

for _mod in pkgutil.iter_modules(commands.__path__):
    importlib.import_module(f"autofocus.commands.{_mod.name}")

__all__ = ["app"]
