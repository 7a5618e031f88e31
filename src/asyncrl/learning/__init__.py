"""What learners share, below the algorithms that use it: counters and publishing, linear
schedules, the off-policy algorithms' replay settings and their replay-fed learner."""
