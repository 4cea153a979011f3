"""`python -m validation.hf_llama`, the documented spelling: the code lives in validation/model/hf_llama.py."""

if __name__ == "__main__":
    from validation.model.hf_llama import main

    raise SystemExit(main())
