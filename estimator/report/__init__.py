"""Reports written from a plan (the budget workbook). Pure Python; writers import their libraries lazily."""
