"""The change report (`crawler report`): database reads, plots and one HTML page.

data.py reads the database into plain data, figures.py draws PNGs from plain data, html.py
fits the lifetime model and writes the page. Only data.py touches the database.
"""
