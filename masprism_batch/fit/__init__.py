"""Fitting a ranker to a team's own labelled logs offline (`masprism-batch fit`): the fit per system and the
ranker file it writes (the format and how a run applies it: verdict/). Nothing on the run path imports this."""
