"""Acceptance 4 in the console: the new-run form's GPU table shows a GPU type RunPod has in the
volume's datacenter only on hosts older than CUDA 13 as not eligible, with `no-cuda13-hosts`,
and does not let it be chosen."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.e2e.conftest import Api, Org, connect, volume_spec


def test_the_gpu_table_marks_a_gpu_without_cuda13_hosts_not_eligible(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    card = org.owner.put("/v1/storage", json=volume_spec(creds))  # EU-RO-1
    assert card.status_code == 200, card.text
    p = console.sign_in(org.tokens["member"])
    p.goto(f"{stack.base_url}/runs/new")
    h200 = p.locator("tr[data-gpu='NVIDIA H200']")
    expect(h200).to_contain_text("Not eligible (no-cuda13-hosts)")
    expect(h200).to_contain_text("CUDA 13")
    expect(h200.locator("input[type=radio]")).to_be_disabled()
    a100 = p.locator("tr[data-gpu='NVIDIA A100 80GB PCIe']")
    expect(a100).to_contain_text("Eligible")
    expect(a100.locator("input[type=radio]")).to_be_enabled()
