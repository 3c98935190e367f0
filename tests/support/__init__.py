"""Test support: `builders` (test objects, as upstream's allocatortesting), `scheduling` (run and read the
scheduler). Product code never imports from here."""
