from django.urls import path

from . import views

urlpatterns = [
    path("costs/", views.cost_explorer, name="cost-explorer"),
    path("invoices/", views.invoice_list, name="invoice-list"),
    path("invoices/<int:pk>/", views.invoice_detail, name="invoice-detail"),
    path("invoices/<int:pk>/print/", views.invoice_print, name="invoice-print"),
    path("invoices/<int:pk>/memo/", views.invoice_memo, name="invoice-memo"),
    path("budgets/", views.budget_list, name="budget-list"),
    path("budgets/<int:pk>/delete/", views.budget_delete, name="budget-delete"),
    path("reservations/", views.reservation_list, name="reservation-list"),
    path("prices/", views.price_list, name="price-list"),
    path("prices/preempt/<int:pk>/", views.preempt, name="spot-preempt"),
]
