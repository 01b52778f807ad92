"""`nodeagent experiment eviction SCENARIO.yaml`: eviction experiments with injected or real pressure, a timeline
and a plot (issue 17). Importing this package is cheap: matplotlib is imported only when a plot is drawn."""
