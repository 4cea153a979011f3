"""`python -m validation.hf_profile`, the documented spelling: the code lives in validation/model/hf_profile.py."""

if __name__ == "__main__":
    from validation.model.hf_profile import main

    raise SystemExit(main())
