"""`python -m validation.model_report`, the documented spelling: the code lives in validation/model/model_report.py."""

if __name__ == "__main__":
    from validation.model.model_report import main

    raise SystemExit(main())
