# ruff: noqa: E501  (shop HTML, one element a line)
"""Shop pages in non-Latin scripts, written for these tests (no third-party page copied).

Each is shaped like a common shop platform of its market (header with a cart and menu, a
breadcrumb, gallery, buy box with price, quantity and an add-to-cart form, related products,
footer) and carries no schema.org Product, no og:type product and no product meta tags: the
parser must tell from the visible page alone that it shows one product.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Page:
    """A page, its URL and what a shopper reads on it (None: the page does not say)."""

    url: str
    html: str
    name: str
    price: Decimal
    currency: str
    in_stock: bool | None
    sku: str | None = None


def _related(tiles: list[tuple[str, str]]) -> str:
    return "".join(
        f'<li class="item"><a href="/p/{i}"><img src="/i/{i}.jpg" alt=""><span>{name}</span></a>'
        f'<span class="cost">{price}</span></li>'
        for i, (name, price) in enumerate(tiles, start=100)
    )


KOREAN = Page(
    url="https://shop.example.kr/goods/goods_view.php?goodsNo=1000012345",
    name="여성 니트 가디건 베이지",
    price=Decimal("12900"),
    currency="KRW",
    in_stock=True,
    sku="KN-2207",
    html="""<!doctype html><html lang="ko"><head><meta charset="utf-8">
<title>여성 니트 가디건 베이지 : 예시샵</title></head><body>
<div id="header"><a href="/">예시샵</a><a href="/order/cart.php">장바구니 <span>0</span></a>
<ul class="gnb"><li><a href="/goods/list?c=1">아우터</a></li><li><a href="/goods/list?c=2">니트</a></li></ul></div>
<div class="location"><a href="/">홈</a> &gt; <a href="/goods/list?c=2">니트</a></div>
<div class="item_photo_info"><img src="/data/goods/1.jpg" alt="여성 니트 가디건 베이지"></div>
<div class="item_info_box">
 <h2 class="item_tit">여성 니트 가디건 베이지</h2>
 <dl><dt>판매가</dt><dd class="item_price"><del>19,000원</del> <strong>12,900</strong>원</dd></dl>
 <dl><dt>품번</dt><dd>KN-2207</dd></dl>
 <dl><dt>배송비</dt><dd>3,000원 (50,000원 이상 무료)</dd></dl>
 <form name="frmView" method="post" action="/order/cart_ps.php">
  <input type="hidden" name="goodsNo" value="1000012345">
  <div class="count"><button type="button" class="down">-</button>
   <input type="text" name="goodsCnt[]" value="1" title="수량"><button type="button" class="up">+</button></div>
  <div class="btn_choice_box"><button type="submit" class="btn_add_cart">장바구니 담기</button>
   <button type="button" class="btn_add_order">바로 구매</button></div>
 </form>
</div>
<div class="related"><h3>함께 본 상품</h3><ul>"""
    + _related([("니트 조끼", "15,900원"), ("울 머플러", "9,900원"), ("카라 니트", "21,000원")])
    + """</ul></div><div id="footer">(주)예시샵 사업자등록번호 123-45-67890</div></body></html>""",
)

KOREAN_SOLD_OUT = Page(
    url="https://shop.example.kr/product/detail.html?product_no=5521",
    name="스테인리스 텀블러 500ml",
    price=Decimal("18500"),
    currency="KRW",
    in_stock=False,
    html="""<!doctype html><html lang="ko"><head><meta charset="utf-8">
<title>스테인리스 텀블러 500ml - 예시몰</title></head><body>
<header><a href="/">예시몰</a></header>
<div class="xans-product-detail"><div class="headingArea"><h2>스테인리스 텀블러 500ml</h2></div>
<table><tr><th>판매가</th><td><strong id="span_product_price_text">18,500원</strong></td></tr>
<tr><th>배송방법</th><td>택배</td></tr></table>
<div class="ec-base-button"><span class="displaynone">구매하기</span>
<a href="#none" class="btnSoldout">품절</a></div></div>
<footer>고객센터 1588-0000</footer></body></html>""",
)

RUSSIAN = Page(
    url="https://shop.example.ru/catalog/chayniki/chaynik-steklyannyy-1-5-l/",
    name="Чайник стеклянный 1,5 л",
    price=Decimal("1290"),
    currency="RUB",
    in_stock=True,
    sku="ЧС-1500",
    html="""<!doctype html><html lang="ru"><head><meta charset="utf-8">
<title>Чайник стеклянный 1,5 л — купить в интернет-магазине</title></head><body>
<header class="site-header"><a href="/">Магазин</a><a href="/personal/cart/">Корзина: 0 ₽</a></header>
<div class="breadcrumbs"><a href="/">Главная</a> / <a href="/catalog/">Каталог</a> /
<a href="/catalog/chayniki/">Чайники</a></div>
<div class="product-item-detail">
 <h1>Чайник стеклянный 1,5 л</h1>
 <div class="product-item-detail-article">Артикул: ЧС-1500</div>
 <div class="product-item-detail-price-old">1 590 ₽</div>
 <div class="product-item-detail-price-current">1 290 ₽</div>
 <div class="product-item-detail-info-container">В наличии</div>
 <div class="product-item-amount"><a class="minus">−</a><input type="number" name="quantity" value="1"><a class="plus">+</a></div>
 <a class="btn btn-primary product-item-detail-buy-button" href="javascript:void(0)">В корзину</a>
</div>
<div class="catalog-section recommended"><h2>С этим товаром покупают</h2><ul>"""
    + _related([("Заварник 0,8 л", "790 ₽"), ("Кружка", "350 ₽"), ("Подставка", "420 ₽")])
    + """</ul></div><footer>© Магазин</footer></body></html>""",
)

KAZAKH = Page(
    url="https://shop.example.kz/kk/p/shay-kese-6-dana/",
    name="Шай кесе жиынтығы, 6 дана",
    price=Decimal("12990"),
    currency="KZT",
    in_stock=True,
    html="""<!doctype html><html lang="kk"><head><meta charset="utf-8">
<title>Шай кесе жиынтығы, 6 дана | Дүкен</title></head><body>
<nav><a href="/">Басты бет</a><a href="/cart">Себет</a></nav>
<main><h1>Шай кесе жиынтығы, 6 дана</h1>
<div class="price">12 990 ₸</div>
<form action="/cart/add" method="post"><input type="hidden" name="id" value="77120">
<label>Саны <input type="number" name="qty" value="1" min="1"></label>
<button type="submit">Себетке қосу</button></form></main>
<footer>Дүкен © 2024</footer></body></html>""",
)

CHINESE = Page(
    url="https://item.example.cn/100023456.html",
    name="不锈钢保温杯 500ml 白色",
    price=Decimal("199.00"),
    currency="CNY",
    in_stock=True,
    sku="BW-500W",
    html="""<!doctype html><html lang="zh-CN"><head><meta charset="utf-8">
<title>【示例商城】不锈钢保温杯 500ml 白色</title></head><body>
<div id="shortcut"><a href="/">首页</a><a href="/cart">购物车</a></div>
<div class="crumb"><a href="/">首页</a> &gt; <a href="/list/1">杯壶</a></div>
<div class="product-intro">
 <div class="sku-name">不锈钢保温杯 500ml 白色</div>
 <div class="summary-price"><span class="p-price"><span>¥</span><span class="price">199.00</span></span>
  <span class="p-price-old"><del>¥259.00</del></span></div>
 <div class="summary-stock">现货</div>
 <ul class="parameter"><li>货号：BW-500W</li><li>产地：中国大陆</li></ul>
 <div class="choose-amount"><a class="btn-reduce">-</a><input id="buy-num" value="1"><a class="btn-add">+</a></div>
 <a id="InitCartUrl" class="btn-special1 btn-lg" href="/cart/add?pid=100023456">加入购物车</a>
</div>
<div class="recommend"><h3>为你推荐</h3><ul>"""
    + _related([("保温壶 1L", "¥159.00"), ("玻璃杯", "¥39.90"), ("杯刷", "¥9.90")])
    + """</ul></div></body></html>""",
)

TAIWANESE = Page(
    url="https://www.example.com.tw/product/A0012345",
    name="陶瓷馬克杯 350ml",
    price=Decimal("390"),
    currency="TWD",
    in_stock=True,
    html="""<!doctype html><html lang="zh-Hant-TW"><head><meta charset="utf-8">
<title>陶瓷馬克杯 350ml | 範例購物網</title></head><body>
<header><a href="/">範例購物網</a><a href="/cart">購物車</a></header>
<section class="prod-main"><h1 class="prod-name">陶瓷馬克杯 350ml</h1>
<p class="prod-price">售價 <b>NT$390</b></p>
<p>商品編號：A0012345</p>
<form action="/cart/add" method="post"><input type="hidden" name="pid" value="A0012345">
<select name="qty"><option>1</option><option>2</option></select>
<button type="submit" class="btn">加入購物車</button></form></section>
<footer>客服專線</footer></body></html>""",
)

JAPANESE = Page(
    url="https://shop.example.jp/products/detail/1234",
    name="南部鉄器 急須 0.65L",
    price=Decimal("1280"),
    currency="JPY",
    in_stock=True,
    sku="NT-0650",
    html="""<!doctype html><html lang="ja"><head><meta charset="utf-8">
<title>南部鉄器 急須 0.65L / 例示ストア</title></head><body>
<header class="ec-layoutRole__header"><a href="/">例示ストア</a><a href="/cart">カート</a></header>
<div class="ec-productRole">
 <div class="ec-productRole__title"><h2 class="ec-headingTitle">南部鉄器 急須 0.65L</h2></div>
 <div class="ec-productRole__code">型番： <span class="product-code-default">NT-0650</span></div>
 <div class="ec-productRole__priceRegular">通常価格：<span>￥1,500</span></div>
 <div class="ec-price"><span class="ec-price__price">￥1,280</span><span class="ec-price__tax">税込</span></div>
 <form action="/products/add_cart/1234" method="post" id="form1" name="form1">
  <div class="ec-numberInput"><span>数量</span><input type="number" name="quantity" value="1" min="1"></div>
  <div class="ec-productRole__btn"><button type="submit" class="ec-blockBtn--action add-cart">カートに入れる</button></div>
 </form>
</div>
<div class="ec-shelfRole"><h3>おすすめ商品</h3><ul>"""
    + _related([("鉄瓶 1.2L", "￥8,800"), ("茶托", "￥600"), ("湯呑", "￥900")])
    + """</ul></div><footer class="ec-footerRole">会社概要</footer></body></html>""",
)

GREEK = Page(
    url="https://www.example.gr/kouzina/kanata-gyali-1-5l",
    name="Κανάτα γυάλινη 1,5 λίτρα",
    price=Decimal("24.90"),
    currency="EUR",
    in_stock=True,
    sku="KG-150",
    html="""<!doctype html><html lang="el"><head><meta charset="utf-8">
<title>Κανάτα γυάλινη 1,5 λίτρα | Κατάστημα</title></head><body>
<header class="main-header"><a href="/">Κατάστημα</a><a href="/cart">Καλάθι (0)</a></header>
<nav class="breadcrumb"><a href="/">Αρχική</a> › <a href="/kouzina">Κουζίνα</a></nav>
<div class="product-details"><h1>Κανάτα γυάλινη 1,5 λίτρα</h1>
<div>Κωδικός: KG-150</div>
<div class="product-price"><span class="old">29,90 €</span> <span class="final">24,90 €</span></div>
<div class="availability">Άμεσα διαθέσιμο</div>
<form method="post" action="/cart/add"><input type="hidden" name="product_id" value="8812">
<input type="number" name="quantity" value="1"><button type="submit">Προσθήκη στο καλάθι</button></form></div>
<footer>Όροι χρήσης</footer></body></html>""",
)

ARABIC = Page(
    url="https://www.example.sa/ar/p/dallah-arabic-coffee-pot",
    name="دلة قهوة عربية نحاسية",
    price=Decimal("349.00"),
    currency="SAR",
    in_stock=True,
    sku="DL-349",
    html="""<!doctype html><html lang="ar" dir="rtl"><head><meta charset="utf-8">
<title>دلة قهوة عربية نحاسية - متجر المثال</title></head><body>
<header><a href="/ar">متجر المثال</a><a href="/ar/cart">سلة التسوق</a></header>
<div class="product-main"><h1>دلة قهوة عربية نحاسية</h1>
<div class="product-price"><span class="price-old"><del>٤٢٠٫٠٠ ر.س.‏</del></span>
<span class="price-now">٣٤٩٫٠٠ ر.س.‏</span></div>
<div class="stock">متوفر</div><div>رمز المنتج: DL-349</div>
<form action="/ar/cart/add" method="post"><input type="hidden" name="product_id" value="349">
<label>الكمية</label><input type="number" name="quantity" value="1">
<button type="submit" class="btn">أضف إلى السلة</button></form></div>
<footer>جميع الحقوق محفوظة</footer></body></html>""",
)

HEBREW = Page(
    url="https://www.example.co.il/product/french-press-1l",
    name="מקינטה פרנץ' פרס 1 ליטר",
    price=Decimal("89.90"),
    currency="ILS",
    in_stock=True,
    sku="FP-1000",
    html="""<!doctype html><html lang="he" dir="rtl"><head><meta charset="utf-8">
<title>מקינטה פרנץ' פרס 1 ליטר | חנות לדוגמה</title></head><body>
<header class="site-header"><a href="/">חנות לדוגמה</a><a href="/cart">סל קניות</a></header>
<div class="summary entry-summary"><h1 class="product_title">מקינטה פרנץ' פרס 1 ליטר</h1>
<p class="price"><span class="amount"><bdi><span class="currency">₪</span>89.90</bdi></span></p>
<p class="stock in-stock">במלאי</p>
<form class="cart" method="post"><div class="quantity"><input type="number" name="quantity" value="1"></div>
<button type="submit" name="add-to-cart" value="501" class="single_add_to_cart_button">הוספה לסל</button></form>
<div class="product_meta">מק"ט: <span class="sku">FP-1000</span></div></div>
<footer>כל הזכויות שמורות</footer></body></html>""",
)

THAI = Page(
    url="https://www.example.co.th/product/rice-cooker-1-8l",
    name="หม้อหุงข้าวไฟฟ้า 1.8 ลิตร",
    price=Decimal("1290"),
    currency="THB",
    in_stock=True,
    sku="RC-18",
    html="""<!doctype html><html lang="th"><head><meta charset="utf-8">
<title>หม้อหุงข้าวไฟฟ้า 1.8 ลิตร - ร้านตัวอย่าง</title></head><body>
<header><a href="/">ร้านตัวอย่าง</a><a href="/cart">ตะกร้าสินค้า</a></header>
<div class="product-detail"><h1>หม้อหุงข้าวไฟฟ้า 1.8 ลิตร</h1>
<div>รหัสสินค้า: RC-18</div>
<div class="price-box"><span class="special-price">฿1,290</span><span class="old-price">฿1,590</span></div>
<div>มีสินค้า</div>
<form action="/checkout/cart/add" method="post"><span>จำนวน</span><input type="number" name="qty" value="1">
<button type="submit">หยิบใส่ตะกร้า</button></form></div>
<footer>ติดต่อเรา</footer></body></html>""",
)

PRODUCT_PAGES = {
    "korean": KOREAN,
    "korean-sold-out": KOREAN_SOLD_OUT,
    "russian": RUSSIAN,
    "kazakh": KAZAKH,
    "chinese": CHINESE,
    "taiwanese": TAIWANESE,
    "japanese": JAPANESE,
    "greek": GREEK,
    "arabic": ARABIC,
    "hebrew": HEBREW,
    "thai": THAI,
}


def _listing(lang: str, url: str, heading: str, tiles: list[tuple[str, str]]) -> tuple[str, str]:
    cards = "".join(
        f'<li class="goods"><a href="/p/{i}"><img src="/i/{i}.jpg" alt="{name}">'
        f'<strong>{name}</strong></a><div class="goods-price">{price}</div>'
        f'<button type="button">+</button></li>'
        for i, (name, price) in enumerate(tiles, start=1)
    )
    return url, (
        f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>{heading}</title>'
        f'</head><body><header><a href="/">shop</a></header><h1>{heading}</h1><ul>{cards}</ul>'
        f"<footer>©</footer></body></html>"
    )


NOT_PRODUCT_PAGES = {
    "korean-category": _listing(
        "ko",
        "https://shop.example.kr/goods/goods_list.php?cateCd=002",
        "니트",
        [(f"니트 {n}", f"{n},900원") for n in range(11, 20)],
    ),
    "russian-category": _listing(
        "ru",
        "https://shop.example.ru/catalog/chayniki/",
        "Чайники",
        [(f"Чайник {n}", f"1 {n}0 ₽") for n in range(11, 20)],
    ),
    "arabic-category": _listing(
        "ar",
        "https://www.example.sa/ar/c/coffee",
        "أدوات القهوة",
        [(f"دلة {n}", f"{n}٩٫٠٠ ر.س.") for n in range(11, 20)],
    ),
    "japanese-article": (
        "https://shop.example.jp/blog/2024/tea-kettle-care",
        """<!doctype html><html lang="ja"><head><meta charset="utf-8">
<title>鉄瓶のお手入れ方法 | 例示ストア</title></head><body><header><a href="/">例示ストア</a></header>
<article><h1>鉄瓶のお手入れ方法</h1><p>2024年3月1日</p><p>鉄瓶は使い終わったら余熱で乾かします。
錆びた場合は茶殻で煮出してください。</p><p>関連記事：<a href="/blog/1">急須の選び方</a></p></article>
<footer>会社概要</footer></body></html>""",
    ),
    "greek-article": (
        "https://www.example.gr/blog/pos-na-dialexete-kanata",
        """<!doctype html><html lang="el"><head><meta charset="utf-8">
<title>Πώς να διαλέξετε κανάτα | Κατάστημα</title></head><body><header>Κατάστημα</header>
<article><h1>Πώς να διαλέξετε κανάτα</h1><p>Η γυάλινη κανάτα δεν κρατά οσμές και πλένεται
εύκολα στο πλυντήριο πιάτων.</p></article><footer>Όροι χρήσης</footer></body></html>""",
    ),
    "chinese-article": (
        "https://www.example.cn/news/2024/baowenbei",
        """<!doctype html><html lang="zh-CN"><head><meta charset="utf-8">
<title>保温杯怎么选 - 示例商城资讯</title></head><body><div id="shortcut"><a href="/">首页</a></div>
<div class="article"><h1>保温杯怎么选</h1><p>选择保温杯时，首先要看内胆材质，其次看保温时长。</p>
</div></body></html>""",
    ),
}
