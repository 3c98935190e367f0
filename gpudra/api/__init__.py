"""The resource.k8s.io/v1 object model: objects stay plain dicts in their YAML/JSON shape.

- `gpudra.api.load`: `load_paths(paths) -> list[Document]` (files, directories, "-" for stdin; multi-document
  YAML, JSON, `List` kinds), `load_text(text, source)`, `LoadError`.
- `gpudra.api.yaml_files`: `load_yaml`, `load_yaml_documents`, `read_yaml`: any other YAML file, with the loader's
  limits (the one way gpudra reads YAML).
- `gpudra.api.goint`: Gt/Lt integers as kube-scheduler parses them (`strconv.ParseInt(s, 10, 64)`).
- `gpudra.api.validate`: `validate_document(doc)`, `validate_documents(docs) -> list[Problem]`, `has_errors`.
- `gpudra.api.problems.Problem`: `FILE:doc N (Kind/name): field.path: message`.
- `gpudra.api.defaults.apply_defaults(obj)`, `gpudra.api.convert.to_v1(obj)` (v1beta1/v1beta2 -> v1).
- the mechanical repairs behind `gpudra validate --fix` are gpudra.fix (they name what the driver publishes).
- `gpudra.api.dump`: `dump_yaml(objs)`, `dump_json(objs)` in the loaded key order.
- `gpudra.quantity.Quantity` and `gpudra.semver.parse_semver` live below it (gpudra.cel needs them too).
- `gpudra.api.schema`: the declarative schema (`SCHEMAS[(apiVersion, kind)]`, `core.POD_TEMPLATE_PATHS`).

Submodules are imported on demand so that importing one stays light.
"""
