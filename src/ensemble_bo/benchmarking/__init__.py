"""The benchmark framework that the benchmark pipeline and benchmarks/*.py share.

The cells are core/grid.py's (`Cell`: a `MethodCell` of the pipeline, a
`ToolCell` of a script); here: where their records are kept (`store`), how
they run, in parallel and resumably (`runner`), the scripts' report tables and
statistics (`tables`), and their provenance, options and loop (`scripts`). No
Kedro, no MLflow: the pipeline's node and catalog entry wrap these.
"""
