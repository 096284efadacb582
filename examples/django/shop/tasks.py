from django.db import transaction
from django.tasks import task

from shop.models import Order


@task(queue_name="mail", priority=10, max_attempts=8, lease=60)
def send_confirmation(order_id: int) -> str:
    order = Order.objects.get(id=order_id)
    order.confirmed = True  # a real shop would send the e-mail here
    order.save(update_fields=["confirmed"])
    return f"confirmed order {order.id} to {order.email}"


def place_order(email: str) -> tuple[Order, str]:
    """The order and its confirmation commit together, or neither does."""
    with transaction.atomic():
        order = Order.objects.create(email=email)
        result = send_confirmation.enqueue(order.id)
    return order, result.id
