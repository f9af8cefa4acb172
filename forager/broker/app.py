"""The Celery app of Celery dispatch: RabbitMQ connection, the three queues, the one task name.

Messages carry a task id and the lease owner of the claim that sent it, nothing else: the
database is the source of truth, and a worker reads the task when it takes it. Workers ack a
message only after running it (acks late) and hold one message at a time (prefetch 1); a
worker that dies mid-task leaves the message to RabbitMQ, whose redelivery then finds the task
taken (the lease expiring is what brings the task back). Publishing waits for RabbitMQ's
confirm, so the relay marks a row sent only once the broker holds its message.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery
from kombu.entity import Queue

from forager.config import Settings
from forager.queue.door import QUEUES, Message

# The one task every message asks for; ``worker.consumer`` registers it.
RUN_TASK = "forager.run_task"
# A publish that fails (RabbitMQ away) is retried briefly, then left to the next relay step.
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1}


def queue_name(settings: Settings, queue: str) -> str:
    """The RabbitMQ name of one of ``QUEUES`` (with ``FORAGER_CELERY_QUEUE_PREFIX``)."""
    return f"{settings.celery_queue_prefix}{queue}"


def celery_app(settings: Settings) -> Celery:
    """A Celery app on ``celery_broker_url`` with Forager's queues; no result backend."""
    app = Celery(
        "forager",
        broker=settings.celery_broker_url.get_secret_value(),
        set_as_current=False,
    )
    names = [queue_name(settings, q) for q in QUEUES]
    app.conf.update(
        task_queues=[Queue(name, routing_key=name, durable=True) for name in names],  # type: ignore[no-untyped-call]
        task_default_queue=queue_name(settings, QUEUES[1]),
        task_create_missing_queues=False,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={"confirm_publish": True},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a worker waits for RabbitMQ to come back
        # A lost connection must not cancel a running task: its result still counts.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Celery's lowered prefetch after a reconnect, restored as old tasks finish, was seen
        # to leave a worker consuming nothing once those tasks' acks failed: not used.
        worker_enable_prefetch_count_reduction=False,
        worker_enable_remote_control=False,  # no pidbox queues per worker
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )
    return app


def publish(app: Celery, settings: Settings, messages: Sequence[Message]) -> None:
    """Publish ``messages`` and wait for RabbitMQ's confirms (blocking: run it in a thread)."""
    with app.producer_or_acquire() as producer:
        for m in messages:
            app.send_task(
                RUN_TASK,
                args=[m.task_id, m.lease_owner],
                queue=queue_name(settings, m.queue),
                producer=producer,
                retry=True,
                retry_policy=_PUBLISH_RETRY,
            )
