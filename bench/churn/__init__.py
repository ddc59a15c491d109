"""The churn soak (`python -m bench.churn_soak`): a fleet whose members, pools and
router-mode models come and go for an hour of compressed time, sampled as it runs, and
judged on whether anything grows with the members that ever existed."""
