"""What separately running parts of florwb agree on, kept apart from both sides so neither
imports the other: the executor and the runtime inside a replayed training process
(`replay_spec`), the recording runtime and the readers of a run's checkpoint folder
(`checkpoint_files`). Modules here import nothing of florwb's: a training process loads
them at `import florwb`."""
