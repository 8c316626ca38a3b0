"""Rendering only: tables, JSON and CSV writers, plots, DOT and traces of typed results
(plans, sweeps, batch rows). Computation lives in the layers below (docs/architecture.md)."""
