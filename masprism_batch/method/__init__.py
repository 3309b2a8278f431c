"""Attribution methods over prefill signals. `masprism` is the faithful method of the paper."""
