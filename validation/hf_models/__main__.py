"""`python -m validation.hf_models`, the documented spelling: the code lives in validation/model/hf_models.py."""

if __name__ == "__main__":
    from validation.model.hf_models import main

    raise SystemExit(main())
