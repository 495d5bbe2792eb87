"""Tests of the report renderers (a package so module names stay unique across tests/)."""
