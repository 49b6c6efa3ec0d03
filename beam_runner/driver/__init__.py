"""The driver: runs and resumes rounds (`runner`), commits them in the run
directory (`run_dir`), holds the run's lease (`run_lock`), and logs them
(`tensorboard_log`)."""
