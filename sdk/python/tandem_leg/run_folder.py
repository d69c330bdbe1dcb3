"""Reading a run folder (docs/run-folder.md): the files `tandem run` prepares once and every leg reads.

    run = RunFolder("runs/clinical-tiny-20261201-094315")
    run.spec["lora"]["rank"], run.spec_sha256
    run.records()[i]["messages"]        # corpus/records.jsonl
    run.plan_updates()                  # plan.json: updates[u][m] = record indices
    run.eval_prefix(), run.split()      # corpus/eval_prefix.json, corpus/split.json
    run.seed("dropout")                 # the seed of the shared dropout masks (and a leg's own RNG)
    run.base_dir, run.init_dir, run.tokenizer_dir, run.leg_dir("sdk-python")

Standard library only.
"""
import json
import os


class RunFolderError(ValueError):
    """A run folder that is missing a file or holds a malformed one (the message names the file)."""


def _load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing (is this a run folder prepared by `tandem run`?)") from None
    except ValueError as e:
        raise RunFolderError(f"{path}: not valid JSON ({e})") from None


class RunFolder:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        doc = _load_json(self.file("experiment.json"))
        if not isinstance(doc, dict) or "spec" not in doc or "spec_sha256" not in doc:
            raise RunFolderError(f"{self.file('experiment.json')}: needs 'spec' and 'spec_sha256'")
        self.spec = doc["spec"]
        self.spec_sha256 = doc["spec_sha256"]
        self._records = None

    # ---- paths -------------------------------------------------------------------------------------
    def file(self, *parts):
        return os.path.join(self.path, *parts)

    @property
    def base_dir(self):
        """The HF checkpoint folder of the base weights (config.json + model.safetensors)."""
        return self.file("base")

    @property
    def init_dir(self):
        """The initial LoRA adapter in peft's layout (adapter_model.safetensors + adapter_config.json)."""
        return self.file("init")

    @property
    def tokenizer_dir(self):
        return self.file("tokenizer")

    def leg_dir(self, leg):
        """legs/<leg>/ (created): checkpoints and the final adapter go here."""
        d = self.file("legs", leg)
        os.makedirs(d, exist_ok=True)
        return d

    # ---- the experiment ----------------------------------------------------------------------------
    def leg_setting(self, leg, key):
        """A spec field with the leg's override applied (spec["overrides"][leg][key])."""
        return self.spec.get("overrides", {}).get(leg, {}).get(key, self.spec[key])

    def seed(self, name):
        """What seed `name` (split, base, adapter, plan, dropout) is: spec["seeds"][name], else the
        experiment's `seed` (docs/experiment-format.md "seeds"; `seeds` is absent when all equal it)."""
        return int(self.spec.get("seeds", {}).get(name, self.spec["seed"]))

    # ---- data --------------------------------------------------------------------------------------
    def records(self):
        """corpus/records.jsonl: index, id, source, split, messages (render and tokenize them yourself)."""
        if self._records is None:
            path = self.file("corpus", "records.jsonl")
            out = []
            try:
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if line.strip():
                            try:
                                out.append(json.loads(line))
                            except ValueError as e:
                                raise RunFolderError(f"{path}: line {n}: not valid JSON ({e})") from None
            except FileNotFoundError:
                raise RunFolderError(f"{path}: missing") from None
            self._records = out
        return self._records

    def split(self):
        return _load_json(self.file("corpus", "split.json"))

    def eval_prefix(self):
        """Indices (into records) of the fixed held-out evaluation prefix, in order."""
        return _load_json(self.file("corpus", "eval_prefix.json"))["indices"]

    def plan(self):
        return _load_json(self.file("plan.json"))

    def plan_updates(self):
        """plan.json's updates: updates[u][m] = the record indices of micro-batch m of update u."""
        return self.plan()["updates"]

    def l3_count(self):
        """K: how many leading records the l3 event reports."""
        return min(int(self.spec.get("l3_records", 64)), len(self.records()))
