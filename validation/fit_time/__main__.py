"""`python -m validation.fit_time`, the documented spelling: the code lives in validation/timing/fit_time.py."""

if __name__ == "__main__":
    from validation.timing.fit_time import main

    raise SystemExit(main())
