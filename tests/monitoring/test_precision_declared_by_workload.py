"""When the processes on a held GPU declare a precision (GPUCONSOLE_PRECISION, sent
with the process list), the holder instance's TFLOP/s estimate follows it from then on,
marked as the workload's word; the period before keeps what was in force."""

import pytest
from telemetry_wire import record, samples

from audit.models import AuditEvent
from instances.models import Instance, PrecisionPeriod

pytestmark = pytest.mark.django_db(transaction=True)


def with_procs(seq, gpu, *precisions):
    return record(seq, gpu=gpu, gpu_util=90) | {
        "procs": [{"pid": 100 + i, **({"precision": p} if p else {})} for i, p in enumerate(precisions)]}


async def send(agent, token, *records):
    async with agent(token) as a:
        await a.hello()
        await a.send(samples(list(records)))
        assert (await a.recv())["type"] == "ack"


async def periods(instance):
    return [(p.precision, p.source) async for p in PrecisionPeriod.objects.filter(instance=instance)]


async def test_the_holders_precision_follows_its_workload(agent, tokens, acme_instance):
    held = await acme_instance.gpus.afirst()
    await send(agent, tokens["h100-a"], with_procs(1, held.uuid, "tf32"))
    instance = await Instance.objects.aget(pk=acme_instance.pk)
    assert instance.precision == "tf32"
    assert await periods(instance) == [("bf16", "default"), ("tf32", "workload")]
    event = await AuditEvent.objects.aget(action="instance.precision")
    assert event.details["source"] == "workload" and event.actor_name == "h100-a"


async def test_the_same_declaration_again_changes_nothing(agent, tokens, acme_instance):
    held = await acme_instance.gpus.afirst()
    await send(agent, tokens["h100-a"], with_procs(1, held.uuid, "fp8"), with_procs(2, held.uuid, "fp8"))
    await send(agent, tokens["h100-a"], with_procs(3, held.uuid, "fp8"))
    assert await periods(acme_instance) == [("bf16", "default"), ("fp8", "workload")]


async def test_processes_that_disagree_or_say_nothing_leave_it_as_it_was(agent, tokens, acme_instance):
    held = await acme_instance.gpus.afirst()
    await send(agent, tokens["h100-a"], with_procs(1, held.uuid, "tf32", "fp8"), with_procs(2, held.uuid, None))
    assert await periods(acme_instance) == []
    assert (await Instance.objects.aget(pk=acme_instance.pk)).precision == "bf16"


async def test_a_free_gpus_processes_change_no_instance(agent, tokens, acme_instance, globex_instance):
    await send(agent, tokens["h100-a"], with_procs(1, "GPU-h100-a-7", "tf32"))
    assert not await PrecisionPeriod.objects.aexists()
