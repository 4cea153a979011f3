"""`python -m validation.inplace_check`, the documented spelling: the code lives in validation/call/inplace_check.py."""

if __name__ == "__main__":
    from validation.call.inplace_check import main

    raise SystemExit(main())
