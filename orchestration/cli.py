def main():
    raise SystemExit("poxm: not built yet")
