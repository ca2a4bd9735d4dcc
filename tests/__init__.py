"""mqfs's tests: a folder per package (store/, fusefs/, pipeline/) plus crash/ for the crash tiers;
the project-wide checks (layers, packaging, setup, the suite itself) sit here."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout under test
