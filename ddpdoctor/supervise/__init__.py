"""``ddpdoctor run -- CMD``: run a launch command unchanged, watch it, explain how it ends.

``process`` starts the job and tees its output, ``progress`` decides whether any rank is
still moving, ``hang`` diagnoses (attach) and stops a job that is not, ``triage`` reads the
kept output of a failed job (logscan), ``env`` prepares the job's environment, ``runner``
ties them together. Nothing here imports torch: the supervisor stays light and never
changes the training it runs.
"""
