"""`plan profiles` and `plan models`: shipped specs, schemas, config import."""

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from simulator import catalog
from simulator.cli.base import (
    JsonOpt,
    app,
    command,
    console,
    file_path,
    gib,
    make_typer,
    print_json,
)
from simulator.planner.space import SearchSpace
from simulator.specs import (
    CostModelCatalog,
    HardwareProfile,
    ModelCard,
    Scenario,
    ServingConfig,
    SpecError,
)

profiles_app = make_typer(
    "Hardware profiles, model cards and cost models shipped with the planner.",
    short_help="Hardware profiles, model cards, cost models.",
)
models_app = make_typer(
    "Model cards: list them, or import one from a Hugging Face config.json.",
    short_help="Model cards: list, or import a config.json.",
)
app.add_typer(profiles_app, name="profiles")
app.add_typer(models_app, name="models")

# ------------------------------------------------------------------------------------ profiles

SCHEMAS: dict[str, type[Any]] = {
    "model-card": ModelCard,
    "hardware-profile": HardwareProfile,
    "serving-config": ServingConfig,
    "scenario": Scenario,
    "cost-models": CostModelCatalog,
    "search-space": SearchSpace,
}


@command(profiles_app, "list")
def profiles_list(as_json: JsonOpt = False) -> None:
    """List hardware profiles, model cards and cost models."""
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    models = [catalog.model_card(n) for n in catalog.model_names()]
    costs = catalog.cost_models()
    if as_json:
        print_json(
            {
                "devices": [d.name for d in devices],
                "models": [m.name for m in models],
                "cost_models": {c.name: sorted(c.usd_per_gpu_hour) for c in costs.values()},
            }
        )
        return
    con = console()
    con.print(hardware_table(devices))
    con.print(model_table(models))
    ct = Table(title="Cost models (hardware_profiles/cost_models.yaml), USD per GPU-hour")
    ct.add_column("name")
    ct.add_column("prices")
    for c in costs.values():
        ct.add_row(c.name, ", ".join(f"{k} {v:.2f}" for k, v in c.usd_per_gpu_hour.items()))
    con.print(ct)


def hardware_table(devices: list[HardwareProfile]) -> Table:
    """Name (its status under it, then whether its latency models are calibrated on it and
    its runtime when not vLLM), device, memory, bandwidth, peak dense PFLOP/s, scale-up."""
    table = Table(title="Hardware profiles (hardware_profiles/<name>/profile.yaml)")
    for col in ("name", "device", "usable GiB", "mem TB/s", "BF16 PF", "FP8 PF", "FP4 PF",
                "scale-up"):  # fmt: skip
        right = col.endswith(("GiB", "TB/s", "PF"))
        table.add_column(col, justify="right" if right else "left")
    for d in devices:
        pf = d.peak_flops_per_s
        notes = [d.status, *(["calibrated"] if d.calibrated else [])]
        notes += [d.runtime] if d.runtime != "vllm" else []
        table.add_row(
            "\n".join([d.name, *notes]),
            d.display_name,
            gib(d.usable_memory_bytes),
            f"{d.memory_bw_bytes_per_s / 1e12:.1f}",
            f"{pf.bf16 / 1e15:.2f}",
            f"{pf.fp8 / 1e15:.2f}" if pf.fp8 else "-",
            f"{pf.fp4 / 1e15:.2f}" if pf.fp4 else "-",
            f"{d.scale_up.kind} x{d.scale_up.domain_size}" if d.scale_up else "none",
        )
    return table


def model_table(models: list[ModelCard]) -> Table:
    """Name (and the aliases that name it, one a line), Hugging Face id, layers, mixers,
    parameters."""
    from simulator.weights import total_params

    table = Table(title="Model cards (simulator/model_cards/<name>.yaml)")
    for col in ("name", "hf id", "layers", "mixers", "params (B)"):
        table.add_column(col, justify="right" if col in ("layers", "params (B)") else "left")
    for m in models:
        mixers = ", ".join(f"{len(v)} {k}" for k, v in m.layers.mixers.items() if v)
        name = "\n".join([m.name, *(f"= {a}" for a in catalog.model_aliases(m.name))])
        table.add_row(name, m.hf_id, str(m.layers.count), mixers, f"{total_params(m) / 1e9:,.1f}")
    return table


@command(profiles_app, "show")
def profiles_show(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="A device, model card or cost model name.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print one hardware profile, model card or cost model."""
    obj: Any
    if name in catalog.device_names():
        obj = catalog.hardware_profile(name)
    elif catalog.resolve_model(name) in catalog.model_names():
        obj = catalog.model_card(name)
    elif name in catalog.cost_models():
        obj = catalog.cost_models()[name]
    else:
        known = catalog.device_names() + catalog.model_names() + list(catalog.cost_models())
        raise SpecError(
            "(arguments)", "name", f"unknown profile {name!r}; known: {', '.join(known)}"
        )
    data = obj.model_dump(mode="json")
    if as_json:
        print_json(data)
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100))


@command(profiles_app, "schema", short_help="Print the JSON Schema of a kind of spec file.")
def profiles_schema(
    kind: Annotated[
        str | None, typer.Argument(metavar="KIND", help=f"One of: {', '.join(SCHEMAS)}.")
    ] = None,
) -> None:
    """Print the JSON Schema of the spec files (all of them when no kind is given)."""
    if kind is None:
        print_json({k: cls.model_json_schema() for k, cls in SCHEMAS.items()})
        return
    if kind not in SCHEMAS:
        raise SpecError(
            "(arguments)", "kind", f"unknown schema {kind!r}; known: {', '.join(SCHEMAS)}"
        )
    print_json(SCHEMAS[kind].model_json_schema())


# ------------------------------------------------------------------------------------ models


@command(models_app, "list")
def models_list(as_json: JsonOpt = False) -> None:
    """List the built-in model cards."""
    names = catalog.model_names()
    if as_json:
        print_json(names)
    else:
        console().print(model_table([catalog.model_card(n) for n in names]))


@command(models_app, "import", short_help="Build a model card from a HF config.json.")
def models_import(
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG_JSON", help="A Hugging Face config.json.")
    ],
    name: Annotated[
        str | None, typer.Option(help="Card name (default: from the file name).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write the card here.", parser=file_path),
    ] = None,
) -> None:
    """Build a model card from a Hugging Face config.json (Kimi, DeepSeek, Qwen3.5, Llama, ...)."""
    from simulator.model_import import card_to_yaml, import_hf_config, load_hf_config
    from simulator.output_files import check_output_file, write_file

    if output is not None:
        check_output_file(output, "--out")
    card_name = (
        name or config.name.removesuffix(".json").removesuffix("_config").split("--")[-1].lower()
    )
    card = import_hf_config(load_hf_config(config), name=card_name, source=str(config))
    text = card_to_yaml(card)
    if output is None:
        sys.stdout.write(text)
    else:
        write_file(output, text)
        typer.echo(f"wrote {output} ({card.layers.count} layers)", err=True)
