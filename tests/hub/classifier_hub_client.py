"""The client side of the classifier Hub round trip, run in a subprocess: the loopback Hub server
(tests/hub/hub_server.py) is started here (``run_client``) and HF_ENDPOINT pointed at it before huggingface_hub
is imported (it reads its settings at import).

``python -m tests.hub.classifier_hub_client PLAN.json`` prints one JSON line of results.
"""

from __future__ import annotations

from .hub_server import FakeHub, run_client


def main(hub: FakeHub, plan: dict) -> dict:
    import torch
    from safetensors.torch import load_file

    import dsf_lightning as dsf
    from dsf_lightning.auto import push_to_hub
    from dsf_lightning.tasks import SequenceClassifier

    expected = load_file(plan["expected"])
    ids, lengths = expected.pop("ids"), expected.pop("lengths")
    out: dict = {}

    def matches(model):
        with torch.no_grad():
            got = model(ids, lengths)
        return [name for name, want in expected.items() if torch.equal(got, want)]

    # `dsf push`'s function publishes a classifier folder (validated by loading it first)
    first = push_to_hub(plan["folders"]["v1"], "owner/tiny-clf")
    out["first_oid"] = first.oid
    classifier = dsf.from_pretrained("owner/tiny-clf")
    out["type"] = type(classifier).__name__
    out["matches"] = matches(classifier.model)
    out["labels"] = classifier.labels
    out["classified"] = classifier.classify("A great movie!").to_dict()
    out["files"] = sorted(p.name for p in classifier.folder.iterdir())

    # the model class itself: from the Hub, push_to_hub of a second version, revision picks the commit
    model = SequenceClassifier.from_pretrained("owner/tiny-clf")
    out["class_matches"] = matches(model)
    v2 = SequenceClassifier.from_pretrained(plan["folders"]["v2"])
    out["second_oid"] = v2.push_to_hub("owner/tiny-clf", commit_message="second").oid
    out["main_matches"] = matches(SequenceClassifier.from_pretrained("owner/tiny-clf"))
    out["revision_matches"] = matches(SequenceClassifier.from_pretrained("owner/tiny-clf", revision=first.oid))
    return out


if __name__ == "__main__":
    run_client(main)
