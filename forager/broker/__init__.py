"""Celery dispatch over RabbitMQ (issue 18): the Celery app and the outbox relay."""
