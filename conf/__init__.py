"""Hydra's config folder, shipped inside the wheel as the package ``harness.conf``.

A regular package (this file) rather than a namespace one, so that
``importlib.resources.files("harness.conf")`` is a real folder in an installed copy (for a
namespace package it is a MultiplexedPath, which ``harness.core.config.config_dir`` cannot use).
"""
