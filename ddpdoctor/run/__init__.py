"""``ddpdoctor run -- CMD``: run a launch command unchanged, watch it, explain how it ends.

``process`` starts the job and keeps its output line by line, ``progress`` decides
whether any rank is still moving, ``looks`` reads a quiet job's stacks (attach) and
``verdict`` decides whether that is a hang (run stops only a confirmed one), ``tree``
knows every process of the job and is the one way run ends them, ``reaper`` ends them if
run itself is SIGKILLed, ``signals`` says what run does when signalled, ``memory`` keeps
each rank's RSS history, ``triage`` reads the kept output of a failed job (diagnose's rules),
``secrets`` keeps the job's secrets out of the report, ``env`` prepares the job's
environment, ``outcome`` writes the report, ``runner`` ties them together. Nothing here
imports torch: the supervisor stays light and never changes the training it runs.
"""
