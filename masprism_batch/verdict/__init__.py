"""What decides a trace's verdict at run time: the run's verdict policy (policy.py), the ranker file it reads
once and checks (rankfile.py, rankcheck.py), what a fitted entry does to a log (case.py, correction.py), the
zero-training rules and fallback (rules.py), the confidence (confidence.py) and the verdict itself (decide.py).
The offline fit that writes ranker files is fit/, which imports this package; nothing here imports fit/."""
