"""`greengpu report --settings FILE`: how a bill is priced (docs/REPORT.md): the tariff (flat, an OpenEI
time-of-use document, or an hourly price CSV), location- and market-based carbon, PUE with its source,
embodied emissions, and the country and region a CodeCarbon CSV names. Every error is one located line.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from greengpu.accounting.carbon import (
    Contract,
    Embodied,
    FlatIntensity,
    HourlyIntensity,
    IntensitySource,
    MarketInstruments,
)
from greengpu.accounting.chargeback import ChargebackRates
from greengpu.accounting.tariffs import FlatRate, HourlyRate, PriceSource, TariffDocumentError, TimeOfUse, parse_openei
from greengpu.config.fields import Fields
from greengpu.config.limits import MAX_YAML_BYTES, check_file_size
from greengpu.config.series import read_series_csv
from greengpu.config.yamlsource import YamlDocument, load_yaml_file, shown
from greengpu.errors import ConfigError
from greengpu.model import TimeSeries
from greengpu.report.settings_chargeback import read_chargeback
from greengpu.report.settings_cloud import CloudCarbon, read_cloud_carbon

TOP_KEYS = ("currency", "country_iso_code", "region", "pue", "pue_source", "tariff", "carbon", "embodied",
            "chargeback")


@dataclass(frozen=True)
class ReportSettings:
    """A report's pricing; None everywhere: the ledger's own figures."""

    currency: str | None = None
    country_iso_code: str = ""
    region: str = ""
    pue: float | None = None
    pue_source: str = ""
    price: PriceSource | None = None
    fixed_charge_per_month: float = 0.0
    carbon: IntensitySource | None = None
    market: MarketInstruments | None = None
    embodied: Embodied | None = None
    series: tuple[tuple[str, TimeSeries], ...] = ()
    """Hourly series read, by the name shown in errors: a month they do not cover is refused."""
    chargeback: ChargebackRates | None = None
    """Prices per GPU-hour and per MIG instance-hour (greengpu.report.settings_chargeback)."""
    cloud_carbon: CloudCarbon | None = None
    """The cloud regions' grid intensity (greengpu.report.settings_cloud)."""


def _relative(base: Path, name: str) -> tuple[Path, str]:
    path = Path(name) if Path(name).is_absolute() else base / name
    return path, str(path)


def _openei(fields: Fields, base: Path) -> tuple[PriceSource, float]:
    name = fields.string("openei", required=True)
    assert name is not None
    timezone = fields.string("timezone", required=True)
    assert timezone is not None
    holidays = []
    for key_path, value in fields.items("holidays"):
        if isinstance(value, dt.datetime) or not isinstance(value, (dt.date, str)):
            raise fields.doc.error(key_path, f"expected a date like 2017-11-23, got {shown(value)}")
        try:
            holidays.append(value if isinstance(value, dt.date) else dt.date.fromisoformat(value))
        except ValueError:
            raise fields.doc.error(key_path, f"not a date like 2017-11-23: {shown(value)}") from None
    path, shown_name = _relative(base, name)
    try:
        check_file_size(path, MAX_YAML_BYTES)
        text = path.read_text(encoding="utf-8")
    except ValueError as error:
        raise ConfigError(shown_name, None, "", str(error)) from None
    except FileNotFoundError:
        raise ConfigError(shown_name, None, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(shown_name, None, "", "is a directory, expected an OpenEI JSON document") from None
    except UnicodeDecodeError:
        raise ConfigError(shown_name, None, "", "not UTF-8 text") from None
    except OSError as error:
        raise ConfigError(shown_name, None, "", f"cannot read: {error.strerror}") from None
    try:
        document = json.loads(text, parse_constant=lambda constant: constant)  # NaN stays a string: refused
    except json.JSONDecodeError as error:
        raise ConfigError(shown_name, error.lineno, "", f"not JSON: {error.msg}") from None
    except RecursionError:
        raise ConfigError(shown_name, None, "", "not JSON: nested too deeply") from None
    source = fields.string("source", f"OpenEI URDB {Path(name).name}")
    assert source is not None
    try:
        tariff = parse_openei(document, timezone=timezone, source=source, holidays=holidays)
    except TariffDocumentError as error:
        if error.key == "timezone":
            raise fields.error("timezone", str(error)) from None
        raise ConfigError(shown_name, None, error.key, str(error)) from None
    return tariff, tariff.fixed_charge_per_month


def _tariff(root: Fields, base: Path, series: list[tuple[str, TimeSeries]]) -> tuple[PriceSource | None, float]:
    fields = root.sub("tariff")
    if fields is None:
        return None, 0.0
    fields.reject_unknown(("flat_per_kwh", "openei", "timezone", "holidays", "hourly_csv", "source",
                           "fixed_charge_per_month"))
    given = [k for k in ("flat_per_kwh", "openei", "hourly_csv") if fields.has(k)]
    if len(given) != 1:
        raise fields.error(None, "give exactly one of flat_per_kwh, openei, hourly_csv")
    fixed = fields.number("fixed_charge_per_month", 0.0, minimum=0.0)
    assert fixed is not None
    if given == ["openei"]:
        tariff, document_fixed = _openei(fields, base)
        return tariff, fixed if fields.has("fixed_charge_per_month") else document_fixed
    for key in ("timezone", "holidays"):
        if fields.has(key):
            raise fields.error(key, "only an openei time-of-use tariff takes this key")
    if given == ["flat_per_kwh"]:
        value = fields.req_number("flat_per_kwh")
        return FlatRate(value, fields.string("source", "flat rate") or ""), fixed
    name = fields.string("hourly_csv", required=True)
    assert name is not None
    path, shown_name = _relative(base, name)
    loaded = read_series_csv(path, "price_per_kwh", allow_negative=True, shown_name=shown_name)
    series.append((shown_name, loaded))
    return HourlyRate(loaded, fields.string("source", f"hourly prices {Path(name).name}") or ""), fixed


def _location(carbon: Fields, base: Path, series: list[tuple[str, TimeSeries]]) -> IntensitySource | None:
    fields = carbon.sub("location")
    if fields is None:
        return None
    fields.reject_unknown(("flat_g_per_kwh", "hourly_csv", "source"))
    if fields.has("flat_g_per_kwh") == fields.has("hourly_csv"):
        raise fields.error(None, "give exactly one of flat_g_per_kwh, hourly_csv")
    if fields.has("flat_g_per_kwh"):
        value = fields.req_number("flat_g_per_kwh", minimum=0.0)
        return FlatIntensity(value, fields.string("source", "flat grid average") or "")
    name = fields.string("hourly_csv", required=True)
    assert name is not None
    path, shown_name = _relative(base, name)
    loaded = read_series_csv(path, "g_per_kwh", allow_negative=False, shown_name=shown_name)
    series.append((shown_name, loaded))
    return HourlyIntensity(loaded, fields.string("source", f"hourly intensity {Path(name).name}") or "")


def _market(carbon: Fields) -> MarketInstruments | None:
    fields = carbon.sub("market")
    if fields is None:
        return None
    fields.reject_unknown(("residual_mix_g_per_kwh", "source", "contracts", "certificates_kwh_per_month"))
    residual = fields.req_number("residual_mix_g_per_kwh", minimum=0.0)
    source = fields.string("source", required=True)
    assert source is not None
    contracts = []
    for path, value in fields.items("contracts"):
        contract = Fields(fields.doc, path, value)
        contract.reject_unknown(("name", "g_per_kwh", "kwh_per_month", "share"))
        if contract.has("kwh_per_month") == contract.has("share"):
            raise contract.error(None, "give exactly one of kwh_per_month, share")
        contracts.append(Contract(name=contract.string("name", required=True) or "",
                                  g_per_kwh=contract.req_number("g_per_kwh", minimum=0.0),
                                  kwh_per_month=contract.number("kwh_per_month", None, minimum=0.0),
                                  share=contract.number("share", None, minimum=0.0, maximum=1.0)))
    certificates = fields.number("certificates_kwh_per_month", 0.0, minimum=0.0)
    assert certificates is not None
    return MarketInstruments(residual_g_per_kwh=residual, source=source, contracts=tuple(contracts),
                             certificates_kwh_per_month=certificates)


def _embodied(root: Fields) -> Embodied | None:
    fields = root.sub("embodied")
    if fields is None:
        return None
    fields.reject_unknown(("kg_per_gpu", "lifetime_years", "source"))
    return Embodied(kg_per_gpu=fields.req_number("kg_per_gpu", minimum=0.0),
                    lifetime_years=fields.req_number("lifetime_years", minimum=0.1, maximum=50.0),
                    source=fields.string("source", required=True) or "")


def read_settings(file: str) -> ReportSettings:
    """The settings in `file` (YAML); relative paths in it are relative to its folder."""
    doc: YamlDocument = load_yaml_file(file)
    if doc.value is None or doc.value == {}:
        # An empty file (or one of comments only) is a settings file that lost its contents, not a request for
        # the ledger's own figures: that is what leaving --settings out says.
        raise ConfigError(file, None, "", f"no settings in the file: give at least one of {', '.join(TOP_KEYS)}, "
                          "or leave --settings out to bill with the ledger's own figures")
    root = Fields(doc, (), doc.value)
    root.reject_unknown(TOP_KEYS)
    base = Path(file).parent
    series: list[tuple[str, TimeSeries]] = []
    price, fixed = _tariff(root, base, series)
    carbon_fields = root.sub("carbon")
    carbon = market = None
    cloud_carbon = None
    if carbon_fields is not None:
        carbon_fields.reject_unknown(("location", "market", "cloud"))
        carbon = _location(carbon_fields, base, series)
        market = _market(carbon_fields)
        cloud_carbon = read_cloud_carbon(carbon_fields)
    pue = root.number("pue", None, minimum=1.0, maximum=5.0)
    if pue is not None and not root.has("pue_source"):
        raise root.error("pue_source", "say where the PUE comes from (metered, design figure, vendor)")
    currency = root.string("currency")
    if currency is None and isinstance(price, TimeOfUse):
        currency = "USD"  # OpenEI's rates are in US dollars
    return ReportSettings(currency=currency, country_iso_code=root.string("country_iso_code", "") or "",
                          region=root.string("region", "") or "", pue=pue,
                          pue_source=root.string("pue_source", "") or "", price=price, fixed_charge_per_month=fixed,
                          carbon=carbon, market=market, embodied=_embodied(root), series=tuple(series),
                          chargeback=read_chargeback(root), cloud_carbon=cloud_carbon)
