"""`gpudra demo`: the allocator on a bundled GPU cluster with the article's (corrected) claims."""

from gpudra.demo.scenario import DemoReport, render_demo, run_demo

__all__ = ["DemoReport", "render_demo", "run_demo"]
