from training.importers.cli import app

app()
