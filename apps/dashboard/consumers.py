from channels.generic.websocket import AsyncJsonWebsocketConsumer


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Placeholder until the live dashboard lands."""

    async def connect(self) -> None:
        await self.close(code=4403)
