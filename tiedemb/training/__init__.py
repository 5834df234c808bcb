"""Run plumbing: what every run needs around its model and data, one file per job.

- ``checkpoints``: crash-safe checkpoint files that refuse non-finite weights; every process's random
  state saved in them and restored on resume; ``last.ckpt`` kept newest; finding, reading and vetting
  the checkpoint a run starts from
- ``preemption``: a run stopped by SIGTERM saves its state at that step
- ``monitor``: gradient norms and token-table statistics logged during pretraining; parameter counts
  logged by every run
- ``metric_names``: the names of the metrics the modules and the monitor log
- ``strategy``: refusing a strategy this machine cannot run, before anything is built
- ``ties``: tied weights kept tied under DDP, FSDP and DeepSpeed, and in checkpoints
- ``files``: atomic file writes and the next free file name
- ``hub``: whether the Hugging Face hub can be reached, probed once
- ``wandb_mode``: W&B online or offline, probed once; one W&B run across resumes; a run's W&B name,
  group, tags and config from its settings
- ``exits``: how every command reports a user's mistake (one line, exit status 2)
- ``log_level``: ``TIEDEMB_LOG_LEVEL`` and ``--log_level``, how much of tiedemb's own logging is shown
"""
