"""Renderers: turn an aggregated profile into text, HTML, folded, pprof or speedscope output."""
