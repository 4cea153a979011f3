"""What to change when a plan does not fit or runs slowly: the decision tree (`tree`), the advice record and
its context (`core`), the kernel rules (`kernel_rules`) and the plan rules with `advise` (`plan_rules`)."""
