"""The `gpu-scheduler scheduler` process: watch, queue, decide, bind."""
