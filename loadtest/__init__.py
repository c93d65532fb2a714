"""Locust suites against a running kit: storm, steady, api, queue (see README.md)."""
