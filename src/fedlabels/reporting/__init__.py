"""Reading results: the HTML report, plots and model inspection."""
